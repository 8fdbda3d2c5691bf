//! What a model with counters needs in scope: `use slotted_core::prelude::*;`.
//!
//! The derive, the migration source, the trait whose methods run maintenance on a counter table
//! (`posts_likes_slots::table.compact_all(…)`) and the connection traits a generic function
//! names. The error type stays `slotted_core::Error`, so that it never shadows another `Error`.
//!
//! ```
//! use diesel::prelude::*;
//! use slotted_core::prelude::*;
//!
//! diesel::table! { posts { id -> Integer, } }
//!
//! #[derive(SlottedCounter)]
//! #[diesel(table_name = posts)]
//! #[slotted(counter = likes, slots = 4)]
//! pub struct Post { pub id: i32 }
//!
//! fn like_and_compact<C: CounterConnection>(conn: &mut C) -> slotted_core::Result<u64> {
//!     Post::likes_of(1).increment(conn)?;
//!     Ok(posts_likes_slots::table.compact_all(1_000, conn)?.records)
//! }
//! ```

#[cfg(feature = "async")]
pub use crate::AsyncCounterConnection;
pub use crate::{CounterConnection, CounterMaintenance, CounterMigrations, SlottedCounter};
