//! Models keyed by the key types beyond `i32`, `i64` and `String`: `i16` (every backend),
//! MySQL's unsigned integers, PostgreSQL's UUIDs, and newtypes over keys as applications make
//! them (diesel-derive-newtype's `DieselNewType`, and Diesel's own derives with hand-written
//! `ToSql`/`FromSql`), and composite keys of two and three columns.
use diesel::backend::Backend;
use diesel::deserialize::{FromSql, FromSqlRow};
use diesel::expression::AsExpression;
use diesel::serialize::{Output, ToSql};
use diesel::sql_types::Text;
use diesel_derive_newtype::DieselNewType;
use slotted_core::{SlottedCounter, SlottedKey};

/// An `i16` key (`SMALLINT`), in a table of its own and in the shared table.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = shelves)]
#[slotted(counter = picks, slots = 4)]
#[slotted(counter = views, slots = 4, storage = shared)]
pub struct Shelf {
    pub id: i16,
}

/// MySQL's `INT UNSIGNED` key, in a table of its own and in the shared table (Diesel has
/// `Unsigned` with its MySQL backend only).
#[cfg(feature = "mysql")]
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = crates)]
#[slotted(counter = downloads, slots = 4)]
#[slotted(counter = stars, slots = 4, storage = shared)]
pub struct Crate {
    pub id: u32,
}

/// MySQL's `BIGINT UNSIGNED` key.
#[cfg(feature = "mysql")]
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = blobs)]
#[slotted(counter = reads, slots = 4)]
pub struct Blob {
    pub id: u64,
}

/// PostgreSQL's `UUID` key.
#[cfg(feature = "postgres")]
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = notes)]
#[slotted(counter = claps, slots = 4)]
pub struct Note {
    pub id: uuid::Uuid,
}

/// A newtype key as diesel-derive-newtype makes it, in a table of its own and in the shared
/// table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, DieselNewType, SlottedKey)]
pub struct ArticleId(pub i32);

/// Keyed by [`ArticleId`].
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = articles)]
#[slotted(counter = reads, slots = 4)]
#[slotted(counter = shares, slots = 4, storage = shared)]
pub struct Article {
    pub id: ArticleId,
}

/// A newtype over a `String`, with a named field, Diesel's `AsExpression`/`FromSqlRow` and
/// hand-written `ToSql`/`FromSql`, as Diesel's guide makes custom types.
#[derive(Debug, Clone, PartialEq, Eq, Hash, AsExpression, FromSqlRow, SlottedKey)]
#[diesel(sql_type = Text)]
pub struct Handle {
    pub name: String,
}

impl<DB: Backend> ToSql<Text, DB> for Handle
where
    str: ToSql<Text, DB>,
{
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, DB>) -> diesel::serialize::Result {
        self.name.as_str().to_sql(out)
    }
}

impl<DB: Backend> FromSql<Text, DB> for Handle
where
    String: FromSql<Text, DB>,
{
    fn from_sql(value: DB::RawValue<'_>) -> diesel::deserialize::Result<Self> {
        String::from_sql(value).map(|name| Handle { name })
    }
}

/// Keyed by [`Handle`], under another field name, with a key length of its own.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = members, primary_key(handle))]
#[slotted(counter = mentions, slots = 4, max_key_length = 64)]
pub struct Member {
    pub handle: Handle,
}

diesel::table! {
    stories (id) {
        id -> BigInt,
        reads_count -> BigInt,
    }
}

/// The inner newtype of [`StoryId`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, DieselNewType, SlottedKey)]
pub struct RawStoryId(pub i64);

/// A newtype over a newtype, with a named field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, SlottedKey)]
pub struct StoryId {
    pub raw: RawStoryId,
}

/// Keyed by [`StoryId`]: a cached roll-up into `stories.reads_count`, day buckets and
/// pre-created slots.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = stories)]
#[slotted(counter = reads, slots = 4, cache = reads_count)]
#[slotted(counter = daily, slots = 2, bucket = day)]
#[slotted(counter = picks, slots = 4, prefill)]
pub struct Story {
    pub id: StoryId,
}

/// The `CREATE TABLE` of [`votes`], as the application's migration holds it.
pub const VOTES_TABLE: &str = "CREATE TABLE votes (person_id INTEGER NOT NULL, \
     article_id INTEGER NOT NULL, score_count BIGINT NOT NULL, PRIMARY KEY (person_id, article_id))";

diesel::table! {
    votes (person_id, article_id) {
        person_id -> Integer,
        article_id -> Integer,
        score_count -> BigInt,
    }
}

/// A composite key as a forum keeps per-person, per-post aggregates
/// (`primary_key(person_id, post_id)`), one column a diesel-derive-newtype: a cached roll-up
/// into `votes.score_count` and day buckets.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = votes, primary_key(person_id, article_id))]
#[slotted(counter = score, slots = 4, cache = score_count)]
#[slotted(counter = daily, slots = 2, bucket = day)]
pub struct Vote {
    pub person_id: i32,
    pub article_id: ArticleId,
}

/// A composite key of an integer and a text column, as a package registry keys versions
/// (`primary_key(package, version)`), with a key length of its own and pre-created slots.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = releases, primary_key(package, version))]
#[slotted(counter = downloads, slots = 4, max_key_length = 64, prefill)]
pub struct Release {
    pub package: i64,
    pub version: String,
}

/// A package registry's daily downloads of a version, keyed as crates.io keys them
/// (`primary_key(version_id, date)`): a composite key with a `Date` column.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = version_downloads, primary_key(version_id, date))]
#[slotted(counter = downloads, slots = 4)]
pub struct VersionDownload {
    pub version_id: i32,
    pub date: chrono::NaiveDate,
}

/// A composite key of three columns, in an order other than the fields'.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = tallies, primary_key(region, code, day))]
#[slotted(counter = hits, slots = 3)]
pub struct Tally {
    pub day: i32,
    pub region: i16,
    pub code: String,
}

/// The migrations of the models: each backend creates every table (a key type another backend
/// maps gets a column that holds it), and counts with the keys it maps.
pub fn migrations() -> slotted_core::CounterMigrations {
    let migrations = slotted_core::CounterMigrations::of::<Shelf>()
        .and::<Article>()
        .and::<Member>()
        .and::<Story>()
        .and::<Vote>()
        .and::<Release>()
        .and::<VersionDownload>()
        .and::<Tally>();
    #[cfg(feature = "mysql")]
    let migrations = migrations.and::<Crate>().and::<Blob>();
    #[cfg(feature = "postgres")]
    let migrations = migrations.and::<Note>();
    migrations
}
