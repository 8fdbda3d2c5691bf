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

pub mod buffer;
mod count;
pub mod diagnostics;
mod dialect;
mod error;
mod exec;
pub mod failover;
pub mod follow;
mod handle;
mod key;
pub mod maintenance;
pub mod migration;
pub mod pooling;
pub mod prelude;
pub mod query;
mod reports;
pub mod retry;
mod slot;
mod sql;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite;
mod table;
mod trace;

pub use count::TOTALS_CHUNK;
pub use dialect::{CounterBackend, Dialect};
pub use error::{Error, Failure, Result};
#[cfg(feature = "async")]
pub use exec::asynch::AsyncCounterConnection;
#[cfg(feature = "async")]
pub use exec::cancel::{CancelGuard, PooledAsyncConnection};
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use exec::hooks as test_hooks;
pub use exec::sync::CounterConnection;
pub use handle::Counter;
pub use key::{CounterKey, KeyKind, KeyOf, KEY_COLUMNS, MAX_KEY_COLUMNS};
pub use maintenance::CounterMaintenance;
pub use migration::{Backfill, CounterMigrations};
pub use slot::SlotStrategy;
pub use table::{
    AdoptingCounterTable, BucketWidth, BucketedCounterTable, CacheSpec, CachedCounterTable,
    CounterSpec, CounterTable, FollowingCounterTable, PrefilledCounterTable, SlottedModel, Storage,
    DEFAULT_MAX_KEY_LENGTH, MAX_BUCKETED_KEY_LENGTH, MAX_KEY_LENGTH, MAX_SLOTS, SHARED_TABLE,
};

pub use slotted_derive::{SlottedCounter, SlottedKey};

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

#[cfg(feature = "async")]
#[doc(hidden)]
#[macro_export]
macro_rules! __slotted_if_async {
    ($($item:tt)*) => { $($item)* };
}

#[cfg(not(feature = "async"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __slotted_if_async {
    ($($item:tt)*) => {};
}

// The derive's expansion of a model keyed by `uuid::Uuid` or `chrono::NaiveDate` (known by
// the key field's type name) passes through these: the first block with the feature on, the
// second (stubs and one `compile_error!` at the key field, naming the feature) with it off,
// which the user's crate cannot tell otherwise.
#[cfg(feature = "uuid")]
#[doc(hidden)]
#[macro_export]
macro_rules! __slotted_if_uuid {
    ({ $($on:tt)* } { $($off:tt)* }) => { $($on)* };
}

#[cfg(not(feature = "uuid"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __slotted_if_uuid {
    ({ $($on:tt)* } { $($off:tt)* }) => { $($off)* };
}

#[cfg(feature = "chrono")]
#[doc(hidden)]
#[macro_export]
macro_rules! __slotted_if_chrono {
    ({ $($on:tt)* } { $($off:tt)* }) => { $($on)* };
}

#[cfg(not(feature = "chrono"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __slotted_if_chrono {
    ({ $($on:tt)* } { $($off:tt)* }) => { $($off)* };
}

/// What the derive's expansion reaches: not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::follow::__check as follow_check;
    pub use crate::key::check as key_check;
    pub use crate::key::sealed::Sealed as SealedKey;

    /// The kind of a counter's key, for its `SPEC`: through `T`, so that a key type that keys
    /// nothing fails once, at `CounterTable::Key`, and not again here.
    pub const fn key_kinds<T: crate::CounterTable>() -> &'static [crate::KeyKind] {
        <T::Key as crate::CounterKey>::KINDS
    }
    pub use crate::key::{KeyValue, RawKey};
    pub use diesel;
    pub use std::collections::HashMap;
    pub use std::result::Result;

    /// Its input with the `async` feature on, nothing without: the derive's async accessors
    /// follow slotted-core's feature, which the user's crate cannot see.
    pub use crate::__slotted_if_async as if_async;

    /// The first of two blocks of items with the `uuid` feature on, the second without.
    pub use crate::__slotted_if_uuid as if_uuid;

    /// The first of two blocks of items with the `chrono` feature on, the second without.
    pub use crate::__slotted_if_chrono as if_chrono;

    /// The SQL types a counter column (`cache = …`, `adopt = …`) may have: `Integer` or
    /// `BigInt`, not null.
    #[diagnostic::on_unimplemented(
        message = "a counter column must be `Integer` or `BigInt` (NOT NULL), not `{Self}`",
        label = "the `cache = …` or `adopt = …` column",
        note = "declare it as `likes_count -> BigInt` (or `Integer`) in the model's `table!`, and as BIGINT (or INTEGER) NOT NULL in its migration"
    )]
    pub trait CacheColumnType {
        /// Its width in bits.
        const BITS: u8;
    }

    impl CacheColumnType for diesel::sql_types::Integer {
        const BITS: u8 = 32;
    }

    impl CacheColumnType for diesel::sql_types::BigInt {
        const BITS: u8 = 64;
    }

    /// A column of the model's table, as the derive reads it (`cache = …`, `adopt = …` and the
    /// key columns): a Diesel column, or a column of [`MissingTable`].
    pub trait ParentColumn {
        /// Its SQL name.
        const NAME: &'static str;
        /// Its SQL type.
        type SqlType;
    }

    impl<C: diesel::Column> ParentColumn for C {
        const NAME: &'static str = C::NAME;
        type SqlType = C::SqlType;
    }

    /// The model's table, as the derive looks it up under Diesel's default name (no
    /// `#[diesel(table_name = …)]`): a Diesel table, or [`MissingTable`] when there is none.
    pub trait ParentTable {
        /// Whether it is [`MissingTable`].
        const MISSING: bool;
    }

    impl<T: diesel::Table> ParentTable for T {
        const MISSING: bool = false;
    }

    /// What the derive finds when no table of the model's default name is in scope: its
    /// expansion looks the table up in a scope of its own where a module of that name, of
    /// `MissingTable` and `MissingColumn`s, is found only when the user's is not. The paths then
    /// resolve, so one check can say what is missing (an `evaluation panicked` naming the table
    /// and `table_name`) instead of rustc's "cannot find module" at every use.
    #[derive(Debug, Clone, Copy)]
    pub struct MissingTable;

    impl ParentTable for MissingTable {
        const MISSING: bool = true;
    }

    /// A column of [`MissingTable`]: it passes every check, which the missing table fails.
    #[derive(Debug, Clone, Copy)]
    pub struct MissingColumn;

    impl ParentColumn for MissingColumn {
        const NAME: &'static str = "";
        type SqlType = diesel::sql_types::BigInt;
    }

    mod sealed {
        pub trait Sealed<K> {}
        impl<K, T: Into<K>> Sealed<K> for T {}
    }

    /// What `Post::likes_of(key)` takes: anything that converts `Into` the counter's key type
    /// `K`, as before, but failing with a message that names `K` rather than "`i32: From<i64>`
    /// is not satisfied" (`do_not_recommend` stops rustc at this trait). Sealed.
    #[diagnostic::on_unimplemented(
        message = "this counter is keyed by `{K}`, not by `{Self}`",
        label = "expected the counter's key type, `{K}`",
        note = "pass the model's primary key type, `{K}`, or one that converts into it without loss (`i16` for `i32`, `&str` for `String`); narrow a wider integer first, e.g. `i32::try_from(id)?`"
    )]
    pub trait IntoCounterKey<K>: sealed::Sealed<K> {
        /// The key.
        fn into_counter_key(self) -> K;
    }

    #[diagnostic::do_not_recommend]
    impl<K, T: Into<K>> IntoCounterKey<K> for T {
        fn into_counter_key(self) -> K {
            self.into()
        }
    }

    /// The counter type of a counter whose `#[slotted]` attribute has an error. The derive's
    /// fallback declares that counter's methods with it, so that the code using them still
    /// compiles and the attribute's error is all the build reports; that build fails, so this
    /// never runs.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct InvalidCounter;

    impl crate::CounterTable for InvalidCounter {
        type Key = i32;
        const SPEC: crate::CounterSpec = crate::CounterSpec {
            model: "",
            counter: "",
            table: "",
            slots: 1,
            strategy: crate::SlotStrategy::Random,
            key: &[crate::KeyKind::Integer],
            max_key_length: 0,
            storage: crate::Storage::Table,
            bucket: None,
            prefill: false,
            cache: None,
            adopt: None,
            follow: None,
        };
    }
    impl crate::BucketedCounterTable for InvalidCounter {}
    impl crate::CachedCounterTable for InvalidCounter {}
    impl crate::AdoptingCounterTable for InvalidCounter {}
    impl crate::FollowingCounterTable for InvalidCounter {}
    impl crate::PrefilledCounterTable for InvalidCounter {}
}
