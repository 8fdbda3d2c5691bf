//! One `#[slotted(…)]` attribute checked into a counter: its values, their defaults, and the
//! keys that do not combine.

use proc_macro2::Span;
use syn::{Ident, LitInt};

use super::name::{checked_name, checked_table, ident, is_plain_name, MAX_TABLE_NAME};
use super::primary_key::KeyType;
use crate::attr::{CounterAttr, COUNTER_FORM};
use crate::errors::Errors;

/// Keep in step with `slotted_core::MAX_SLOTS` (the core's tests check it).
pub const MAX_SLOTS: u16 = 1024;
/// Keep in step with `slotted_core::DEFAULT_MAX_KEY_LENGTH`, `MAX_KEY_LENGTH` and
/// `MAX_BUCKETED_KEY_LENGTH` (the expansion snapshot `string_key` shows them beside each other).
pub const DEFAULT_MAX_KEY_LENGTH: u16 = 255;
/// InnoDB indexes at most 3,072 bytes a key: `VARCHAR(n)` in `utf8mb4` counts 4n, `slot` 2 and
/// `bucket` 8 (measured on MariaDB 10.11: 767 and 765 migrate, 768 and 766 do not).
pub const MAX_KEY_LENGTH: u16 = 767;
pub const MAX_BUCKETED_KEY_LENGTH: u16 = 765;

pub struct Counter {
    pub name: Ident,
    pub slots: u16,
    pub table: Ident,
    pub max_key_length: u16,
    /// Where `max_key_length` was given: a key not known by name is checked there to be text.
    pub max_key_length_at: Option<Span>,
    /// Where `storage = shared` was given: a key not known by name is checked there to fit.
    pub shared_at: Option<Span>,
    pub strategy: Strategy,
    pub bucket: Option<Bucket>,
    pub prefill: bool,
    /// The cache column in the model's table.
    pub cache: Option<Ident>,
    /// The existing counter column of the model's table that the counter adopts.
    pub adopt: Option<Ident>,
    /// `storage = shared`: rows in `slotted_counters`; `table` is then a module name for the
    /// counter's marker type.
    pub shared: bool,
    /// `follow = comments(post_id)`: the child table whose rows the counter counts.
    pub follow: Option<crate::follow::Follow>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Hour,
    Day,
}

/// `slotted_core::SlotStrategy`'s variants.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Thread,
    Random,
    Connection,
}

/// The counter an attribute declares; or, when it cannot be declared, its name if that is a
/// sound method name (for a stub), and `None` if not.
pub(super) fn counter(
    attr: &CounterAttr<'_>,
    parent_table: &str,
    key: Option<&[KeyType]>,
    errors: &mut Errors,
) -> Result<Counter, Option<Ident>> {
    // Its syntax error was reported; the rest of the attribute is unknown.
    if attr.broken {
        return Err(attr.counter.as_ref().filter(|n| is_plain_name(n)).cloned());
    }
    let name = match &attr.counter {
        Some(name) => checked_name(name, errors),
        None if attr.invalid => None,
        None => {
            errors.at(attr.attr, "missing `counter` in #[slotted]", COUNTER_FORM);
            None
        }
    };
    let slots = match &attr.slots {
        Some(lit) => checked_int(lit, "slots", 1, MAX_SLOTS, errors),
        None if attr.invalid => None,
        None => {
            errors.at(
                attr.attr,
                "missing `slots` in #[slotted]",
                "give the slot count: `#[slotted(counter = likes, slots = 16)]`; see the README on choosing it",
            );
            None
        }
    };
    let max_key_length = match &attr.max_key_length {
        Some(lit)
            if key.is_some_and(|k| {
                !k.iter()
                    .any(|k| matches!(k, KeyType::String | KeyType::Other))
            }) =>
        {
            errors.at(
                lit,
                "`max_key_length` applies only to `String` keys",
                "remove it: integer keys have a fixed size",
            );
            None
        }
        Some(lit) => checked_key_length(lit, attr.bucket.as_ref(), errors),
        None => Some(DEFAULT_MAX_KEY_LENGTH),
    };
    let strategy = match &attr.strategy {
        None => Some(Strategy::Connection),
        Some(s) if s == "thread" => Some(Strategy::Thread),
        Some(s) if s == "random" => Some(Strategy::Random),
        Some(s) if s == "connection" => Some(Strategy::Connection),
        Some(s) => {
            errors.at(
                s,
                format_args!("unknown slot strategy `{s}`"),
                "`strategy = connection` (the default: a slot per database connection, chosen by the \
                 server), `strategy = thread` (a slot per live thread) or `strategy = random`",
            );
            None
        }
    };
    let bucket = match &attr.bucket {
        None => Some(None),
        Some(b) if b == "day" => Some(Some(Bucket::Day)),
        Some(b) if b == "hour" => Some(Some(Bucket::Hour)),
        Some(b) => {
            errors.at(
                b,
                format_args!("unknown bucket `{b}`"),
                "`bucket = day` or `bucket = hour` (UTC)",
            );
            None
        }
    };
    let shared = match &attr.storage {
        None => Some(false),
        Some(s) if s == "table" => Some(false),
        Some(s) if s == "shared" => Some(true),
        Some(s) => {
            errors.at(
                s,
                format_args!("unknown storage `{s}`"),
                "`storage = table` (the default: a table per counter) or `storage = shared` (one `slotted_counters` table)",
            );
            None
        }
    };
    if shared == Some(true) {
        let storage = attr.storage.as_ref();
        if key.is_some_and(|k| k.len() > 1) {
            errors.at(
                storage,
                "shared storage keeps one key column: a composite key needs a table of its own",
                "remove `storage = shared` (the counter gets its own table, keyed by every column of the model's primary key)",
            );
        } else if key.is_some_and(|k| k.iter().copied().any(KeyType::refused_by_shared)) {
            errors.at(
                storage,
                "shared storage keeps integer keys of up to 63 bits only",
                "key the model by `i16`, `i32`, `i64` or `u32`, or use `storage = table`",
            );
        }
        if let Some(b) = &attr.bucket {
            errors.at(
                b,
                "bucketed counters need a table of their own",
                "remove `storage = shared`, or the `bucket`",
            );
        }
        if let Some(t) = &attr.table {
            errors.at(
                t,
                "shared counters live in the `slotted_counters` table",
                "remove `table = …`, or `storage = shared`",
            );
        }
    }
    if let (Some(a), Some(b)) = (&attr.adopt, &attr.bucket) {
        errors.at(
            a,
            "`adopt` does not combine with `bucket`: a bucketed counter starts afresh each bucket, and a column's counts have no bucket",
            format_args!("remove `bucket = {b}`, or adopt the column with a counter of its own"),
        );
    }
    if let (Some(p), Some(b)) = (&attr.prefill, &attr.bucket) {
        errors.at(
            p,
            "`prefill` does not combine with `bucket`: a new bucket starts with no rows",
            format_args!("remove `prefill`, or `bucket = {b}`"),
        );
    }
    // Reported when wrong; the counter is then declared as following nothing.
    let follow = crate::follow::checked(attr, key, errors).ok().flatten();
    let name = name.ok_or(None)?;
    let table = match &attr.table {
        Some(table) => checked_table(table, errors).ok_or_else(|| Some(name.clone()))?,
        None => {
            // Shared counters get a module for their marker type, named like a table.
            let suffix = if attr.storage.as_ref().is_some_and(|s| s == "shared") {
                ""
            } else {
                "_slots"
            };
            let text = format!("{parent_table}_{name}{suffix}");
            let Some(table) = ident(&text, name.span()) else {
                errors.at(
                    &name,
                    format_args!("the counter table name `{text}` is not an identifier"),
                    format_args!("name the table: `#[slotted(counter = {name}, slots = …, table = {name}_slots)]`"),
                );
                return Err(Some(name));
            };
            if text.len() > MAX_TABLE_NAME {
                errors.at(
                    &name,
                    format_args!("the counter table name `{table}` is longer than {MAX_TABLE_NAME} characters"),
                    format_args!("name a shorter table: `#[slotted(counter = {name}, slots = …, table = {name}_slots)]`"),
                );
                return Err(Some(name));
            }
            table
        }
    };
    // A bad value was reported above; its default keeps the counter in the fallback model.
    Ok(Counter {
        name,
        slots: slots.unwrap_or(1),
        table,
        max_key_length: max_key_length.unwrap_or(DEFAULT_MAX_KEY_LENGTH),
        max_key_length_at: attr.max_key_length.as_ref().map(syn::LitInt::span),
        shared_at: attr
            .storage
            .as_ref()
            .filter(|_| shared == Some(true))
            .map(Ident::span),
        strategy: strategy.unwrap_or(Strategy::Connection),
        bucket: bucket.flatten(),
        prefill: attr.prefill.is_some(),
        cache: attr.cache.clone(),
        adopt: attr.adopt.clone(),
        shared: shared.unwrap_or(false),
        follow,
    })
}

fn checked_int(lit: &LitInt, key: &str, min: u16, max: u16, errors: &mut Errors) -> Option<u16> {
    match lit.base10_parse::<u64>() {
        Ok(v) if (u64::from(min)..=u64::from(max)).contains(&v) => u16::try_from(v).ok(),
        // Out of range, negative (`-1`), or too large for u64.
        _ if key == "slots" => {
            errors.at(
                lit,
                format_args!("`slots` must be between {min} and {max}"),
                format_args!(
                    "a record's count is spread over 1 to {max} slot rows, and every read sums them; \
                     16 to 128 suits most hot counters"
                ),
            );
            None
        }
        _ => {
            errors.at(
                lit,
                format_args!("`{key}` must be between {min} and {max}"),
                format_args!(
                    "`{key}` takes an integer from {min} to {max}, e.g. `#[slotted(counter = views, slots = 16, {key} = {min})]`"
                ),
            );
            None
        }
    }
}

/// `max_key_length = N`: from 1 to the longest key MySQL/MariaDB can index in this counter's
/// primary key, which a `bucket` column shortens.
fn checked_key_length(lit: &LitInt, bucket: Option<&Ident>, errors: &mut Errors) -> Option<u16> {
    let (max, shape, bytes) = match bucket {
        None => (
            MAX_KEY_LENGTH,
            "`(record_id, slot)`",
            "`slot` takes 2 bytes",
        ),
        Some(_) => (
            MAX_BUCKETED_KEY_LENGTH,
            "`(record_id, bucket, slot)`",
            "`bucket` and `slot` take 10 bytes",
        ),
    };
    let length = lit.base10_parse::<u64>().ok();
    if let Some(length) = length.filter(|l| (1..=u64::from(max)).contains(l)) {
        return u16::try_from(length).ok();
    }
    let shape_note = bucket
        .map(|b| format!(" for a counter with `bucket = {b}`"))
        .unwrap_or_default();
    errors.at(
        lit,
        format_args!("`max_key_length` must be between 1 and {max}{shape_note}"),
        format_args!(
            "use `max_key_length = {max}` or less: MySQL and MariaDB index at most 3,072 bytes in the \
             primary key {shape}, a `utf8mb4` character takes 4 bytes and {bytes}; the default is \
             {DEFAULT_MAX_KEY_LENGTH}"
        ),
    );
    None
}
