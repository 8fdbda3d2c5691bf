//! Models keyed by the key types beyond `i32`, `i64` and `String`: `i16` (every backend),
//! MySQL's unsigned integers and PostgreSQL's UUIDs.
use slotted_core::SlottedCounter;

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

/// The migrations of the models: each backend creates every table (a key type another backend
/// maps gets a column that holds it), and counts with the keys it maps.
pub fn migrations() -> slotted_core::CounterMigrations {
    let migrations = slotted_core::CounterMigrations::of::<Shelf>();
    #[cfg(feature = "mysql")]
    let migrations = migrations.and::<Crate>().and::<Blob>();
    #[cfg(feature = "postgres")]
    let migrations = migrations.and::<Note>();
    migrations
}
