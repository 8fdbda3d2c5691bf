//! A PostgreSQL app's model, as Diesel 2.3 apps write them (a forum post with `Timestamptz`
//! columns, `HasQuery`), with one slotted counter added.
//!
//! `#[derive(HasQuery)]` checks its fields against every backend Diesel has turned on. When
//! slotted-core turned on SQLite by default, this model failed to build:
//! `DateTime<Utc>: FromSqlRow<Timestamptz, Sqlite>` is not satisfied. It builds now that no
//! backend is on by default.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use slotted_core::SlottedCounter;

pub mod schema {
    diesel::table! {
        posts (id) {
            id -> Int4,
            title -> Text,
            published -> Timestamptz,
            updated -> Nullable<Timestamptz>,
        }
    }
}

use schema::posts;

/// The app's post, with a `likes` counter.
#[derive(Debug, Clone, HasQuery, Identifiable, Insertable, SlottedCounter)]
#[diesel(table_name = posts)]
#[slotted(counter = likes, slots = 16)]
pub struct Post {
    pub id: i32,
    pub title: String,
    pub published: DateTime<Utc>,
    pub updated: Option<DateTime<Utc>>,
}

/// The app's own table.
pub const CREATE_POSTS: &str = "CREATE TABLE IF NOT EXISTS posts (id INT4 PRIMARY KEY, \
    title TEXT NOT NULL, published TIMESTAMPTZ NOT NULL, updated TIMESTAMPTZ)";
