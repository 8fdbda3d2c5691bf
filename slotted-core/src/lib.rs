//! # slotted
//!
//! The slotted counter pattern for Diesel. A hot counter (likes, views, downloads) kept in one
//! column makes every writer of a record wait for that row's lock until its transaction commits.
//! slotted spreads one logical counter over N rows of a side table keyed by `(record_id, slot)`:
//! a writer upserts `count = count + delta` into one slot, a reader sums the slots.
//!
//! ```
//! use diesel::prelude::*;
//! use diesel_migrations::MigrationHarness;
//! use slotted_core::{CounterMigrations, SlottedCounter};
//!
//! diesel::table! { posts { id -> Integer, title -> Text, } }
//!
//! #[derive(Queryable, Identifiable, SlottedCounter)]
//! #[diesel(table_name = posts)]
//! #[slotted(counter = likes, slots = 16)]
//! #[slotted(counter = views, slots = 64)]
//! pub struct Post { pub id: i32, pub title: String }
//!
//! let mut conn = SqliteConnection::establish(":memory:")?;
//! conn.run_pending_migrations(CounterMigrations::of::<Post>())?;
//!
//! let post = Post { id: 7, title: "Hello".into() };
//! post.likes().increment(&mut conn)?;
//! post.likes().add(5, &mut conn)?;
//! Post::likes_of(7).decrement(&mut conn)?;
//! assert_eq!(post.likes().total(&mut conn)?, 5);
//! assert_eq!(post.views().total(&mut conn)?, 0);
//!
//! let totals = Post::likes_totals(&[7, 8], &mut conn)?;
//! assert_eq!((totals[&7], totals[&8]), (5, 0));
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! ```
//!
//! See [`SlottedCounter`] for every attribute and what the derive generates, and the README for
//! when the pattern pays and how to choose a slot count.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod counter;
mod diagnostics;
mod error;
mod key;
mod maintenance;
mod migration;
mod retry;
mod slot;
mod table;

pub use backend::{CounterBackend, CounterConnection, Dialect};
pub use counter::{Counter, TOTALS_CHUNK};
pub use diagnostics::{
    diagnose, diagnose_with, Advice, ContentionReport, DiagnoseOptions, DiagnosticsBackend,
    HotRecord, LockWait, LockWaits, TableReport,
};
pub use error::{Error, Result};
pub use key::{CounterKey, KeyKind};
pub use maintenance::{CompactionReport, CounterMaintenance, MAINTENANCE_BATCH, MAX_PAGE};
pub use migration::{down_sql, migration_version, up_sql, CounterMigrations};
pub use retry::{transaction_with_retry, Retried, RetryPolicy, Retryable};
pub use slot::SlotStrategy;
pub use table::{
    BucketWidth, BucketedCounterTable, CacheSpec, CachedCounterTable, CounterSpec, CounterTable,
    PrefilledCounterTable, SlottedModel, Storage, DEFAULT_MAX_KEY_LENGTH, MAX_KEY_LENGTH,
    MAX_SLOTS, SHARED_TABLE,
};

pub use slotted_derive::SlottedCounter;

/// The table shared counters live in (`#[slotted(…, storage = shared)]`), for Diesel queries.
pub mod shared {
    diesel::table! {
        /// Every shared counter's slots, `record_type` naming the counter (`posts.likes`).
        slotted_counters (record_type, record_id, slot) {
            /// `{model table}.{counter}`.
            record_type -> Text,
            /// The counted record's key.
            record_id -> BigInt,
            /// The slot.
            slot -> SmallInt,
            /// This slot's share of the count.
            count -> BigInt,
        }
    }
}

/// What the derive's expansion reaches: not public API.
#[doc(hidden)]
pub mod __private {
    pub use diesel;
    pub use std::collections::HashMap;
    pub use std::result::Result;

    /// The SQL type a cache column must have: `BigInt`, like the totals it holds.
    #[diagnostic::on_unimplemented(
        message = "a cache column must be `BigInt` (BIGINT NOT NULL), not `{Self}`",
        label = "the `cache = …` column",
        note = "declare it as `likes_count -> BigInt` in the model's `table!`, and as BIGINT NOT NULL in its migration"
    )]
    pub trait CacheColumnType {}

    impl CacheColumnType for diesel::sql_types::BigInt {}

    /// Fails to compile unless `C` is a `BigInt` column.
    pub const fn assert_cache_column<C: diesel::Column>()
    where
        C::SqlType: CacheColumnType,
    {
    }
}
