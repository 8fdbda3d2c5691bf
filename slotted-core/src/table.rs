//! What the derive declares about each counter.

use crate::key::{CounterKey, KeyKind};
use crate::slot::SlotStrategy;

/// The most slots one counter may have.
///
/// A read sums every slot of a record, so slots cost reads; beyond a few hundred concurrent writers
/// the database itself, not the row lock, is the bottleneck (see the contention benchmark), and
/// 1,024 slots is already far past that point. The slot number is stored as `SMALLINT`.
pub const MAX_SLOTS: u16 = 1024;

/// The default length, in characters, of a `String` key column on MySQL (`VARCHAR(255)`).
pub const DEFAULT_MAX_KEY_LENGTH: u16 = 255;

/// The longest `String` key MySQL/MariaDB can index in a `(record_id, slot)` primary key:
/// InnoDB keys are at most 3,072 bytes, `utf8mb4` takes up to 4 bytes a character and `slot`
/// 2 bytes (767 × 4 + 2 = 3,070; 768 is refused, measured on MariaDB 10.11).
pub const MAX_KEY_LENGTH: u16 = 767;

/// The longest `String` key of a bucketed counter, whose primary key is
/// `(record_id, bucket, slot)`: the 8-byte `bucket` leaves room for 765 `utf8mb4` characters
/// (765 × 4 + 8 + 2 = 3,070; 766 is refused, measured on MariaDB 10.11).
pub const MAX_BUCKETED_KEY_LENGTH: u16 = 765;

/// A counter's static description: the counter, its table and its slot count.
///
/// The derive writes one per `#[slotted(counter = …)]` attribute, as
/// [`CounterTable::SPEC`]; the runtime builds every statement and migration from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterSpec {
    /// The model's Rust name, e.g. `Post`.
    pub model: &'static str,
    /// The counter's name, e.g. `likes`.
    pub counter: &'static str,
    /// The counter table, e.g. `posts_likes_slots`.
    pub table: &'static str,
    /// How many slot rows one record's count is spread over (1 to [`MAX_SLOTS`]).
    pub slots: u16,
    /// How a write picks its slot.
    pub strategy: SlotStrategy,
    /// The types of the key columns (`record_id`, then `record_id_2`… for a composite key).
    pub key: &'static [KeyKind],
    /// For `String` keys (and text columns of a composite key): the longest key, in
    /// characters, that the table accepts.
    pub max_key_length: u16,
    /// Where the slot rows live.
    pub storage: Storage,
    /// Time buckets, when the counter starts afresh every hour or day.
    pub bucket: Option<BucketWidth>,
    /// Whether increments first try a plain `UPDATE` of pre-created slot rows.
    pub prefill: bool,
    /// The column of the model's own table that roll-ups copy the total into.
    pub cache: Option<CacheSpec>,
    /// The existing counter column of the model's own table that this counter adopts
    /// (`adopt = likes_count`): until [`absorb`](crate::CounterMaintenance::absorb_all) moves
    /// it into the slots, a record's total is that column plus its slots.
    pub adopt: Option<CacheSpec>,
    /// The child table whose rows the counter counts (`follow = comments(post_id)`): its
    /// migration creates triggers there that keep the count.
    pub follow: Option<crate::follow::FollowSpec>,
}

/// Where a counter's slot rows live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Storage {
    /// A table of its own: `(record_id, [bucket,] slot, count)`.
    Table,
    /// The one table every shared counter lives in, [`SHARED_TABLE`]:
    /// `(record_type, record_id, slot, count)`, with this counter's rows under `record_type`.
    Shared {
        /// `{model table}.{counter}`, e.g. `posts.likes`.
        record_type: &'static str,
    },
}

/// The name of the table shared counters live in.
pub const SHARED_TABLE: &str = "slotted_counters";

/// How long one time bucket of a bucketed counter lasts. Buckets are UTC and stored as the Unix
/// time, in seconds, at which they start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BucketWidth {
    /// One bucket per UTC hour.
    Hour,
    /// One bucket per UTC day.
    Day,
}

impl BucketWidth {
    /// The bucket's length in seconds.
    pub fn seconds(self) -> i64 {
        match self {
            BucketWidth::Hour => 3_600,
            BucketWidth::Day => 86_400,
        }
    }

    /// The start of the bucket holding `time`, in Unix seconds.
    pub fn start_of(self, time: std::time::SystemTime) -> i64 {
        let secs = match time.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_secs_f64().ceil() as u64).unwrap_or(i64::MAX),
        };
        // Saturating: a time within one bucket of i64::MIN seconds has no bucket start in i64.
        secs.div_euclid(self.seconds())
            .saturating_mul(self.seconds())
    }
}

/// A counter column of the model's own table: one that holds a rolled-up copy of the total
/// (`cache = …`), or counts of its own that a counter adopts (`adopt = …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSpec {
    /// The model's table, e.g. `posts`.
    pub table: &'static str,
    /// Its primary key columns, e.g. `["id"]` (several for a composite key, in the order of the
    /// counter table's `record_id`, `record_id_2`…).
    pub key_columns: &'static [&'static str],
    /// The column, e.g. `likes_count` (`INTEGER` or `BIGINT`, `NOT NULL`).
    pub column: &'static str,
    /// The column's width in bits: 32 (`Integer`) or 64 (`BigInt`). A total it cannot hold is
    /// an error for that record, never a wrapped value.
    pub bits: u8,
}

impl CacheSpec {
    /// Whether the column holds `value`.
    pub fn holds(&self, value: i64) -> bool {
        self.bits >= 64 || i32::try_from(value).is_ok()
    }
}

/// FNV-1a, 64 bit: fixed forever, unlike `std`'s hasher. Migration versions and the names of
/// a followed table's triggers derive from it.
pub(crate) fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl CounterSpec {
    /// The SQL types of the key columns: the key's, but one BIGINT in the shared table.
    pub fn key_column_kinds(&self) -> &'static [KeyKind] {
        match self.storage {
            Storage::Table => self.key,
            Storage::Shared { .. } => &[KeyKind::BigInt],
        }
    }

    /// The names of the key columns: `record_id`, then `record_id_2`… for a composite key.
    pub fn key_columns(&self) -> &'static [&'static str] {
        let len = self.key.len().clamp(1, crate::key::MAX_KEY_COLUMNS);
        &crate::key::KEY_COLUMNS[..len]
    }

    /// `Model.counter`, as errors name it.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.model, self.counter)
    }
}

/// A counter table, as the derive declares it: implemented for the Diesel `table` type of
/// `{table}::table`, so the table type is the counter's name in the type system.
pub trait CounterTable: Copy + Default + 'static {
    /// The record key: the model's primary key type.
    type Key: CounterKey;
    /// Everything the runtime needs to know.
    const SPEC: CounterSpec;
}

/// A counter with a cache column: implemented by the derive for counters declared with
/// `cache = column`, so the roll-up calls exist only where there is a column to roll up into.
#[diagnostic::on_unimplemented(
    message = "the counter `{Self}` has no cache column",
    label = "declared without `cache`",
    note = "declare a `BigInt` column of the model's table in its attribute: `#[slotted(counter = likes, slots = 16, cache = likes_count)]`"
)]
pub trait CachedCounterTable: CounterTable {}

/// A counter that adopts an existing counter column of the model's table: implemented by the
/// derive for counters declared with `adopt = column`, so that `absorb` and `release` exist only
/// where there is a column to move counts from or into.
#[diagnostic::on_unimplemented(
    message = "the counter `{Self}` adopts no column",
    label = "declared without `adopt`",
    note = "declare the model's existing counter column in its attribute: `#[slotted(counter = likes, slots = 16, adopt = likes_count)]`"
)]
pub trait AdoptingCounterTable: CounterTable {}

/// A counter with time buckets: implemented by the derive for counters declared with
/// `bucket = day` or `bucket = hour`.
#[diagnostic::on_unimplemented(
    message = "the counter `{Self}` has no time buckets",
    label = "declared without `bucket`",
    note = "declare `bucket = day` (or `hour`) in its attribute: `#[slotted(counter = downloads, slots = 8, bucket = day)]`"
)]
pub trait BucketedCounterTable: CounterTable {}

/// A counter declared with `prefill`, whose slot rows can be created up front.
#[diagnostic::on_unimplemented(
    message = "the counter `{Self}` has no pre-created slots",
    label = "declared without `prefill`",
    note = "declare `prefill` in its attribute: `#[slotted(counter = likes, slots = 16, prefill)]`"
)]
pub trait PrefilledCounterTable: CounterTable {}

/// A counter that follows a child table: implemented by the derive for counters declared with
/// `follow = …`, so that verifying and repairing against the child rows exist only where there
/// are child rows.
#[diagnostic::on_unimplemented(
    message = "the counter `{Self}` follows no child table",
    label = "declared without `follow`",
    note = "declare the child table and its column that holds this model's key: `#[slotted(counter = comments, slots = 16, follow = comments(post_id))]`"
)]
pub trait FollowingCounterTable: CounterTable {}

/// A model with slotted counters: implemented by `#[derive(SlottedCounter)]`.
pub trait SlottedModel {
    /// One entry per `#[slotted(counter = …)]` attribute, in declaration order.
    const COUNTERS: &'static [CounterSpec];
}

/// The counter the unit tests describe: `Post.likes`, 16 slots, an `i32` key.
#[cfg(test)]
pub(crate) const TEST_SPEC: CounterSpec = CounterSpec {
    model: "Post",
    counter: "likes",
    table: "posts_likes_slots",
    slots: 16,
    strategy: crate::slot::SlotStrategy::Thread,
    key: &[crate::key::KeyKind::Integer],
    max_key_length: 255,
    storage: Storage::Table,
    bucket: None,
    prefill: false,
    cache: None,
    adopt: None,
    follow: None,
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn buckets_start_on_their_boundary_before_and_after_1970() {
        let at = |secs: i64| match u64::try_from(secs) {
            Ok(s) => UNIX_EPOCH + Duration::from_secs(s),
            Err(_) => UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()),
        };
        assert_eq!(BucketWidth::Day.start_of(at(86_400 * 3 + 5)), 86_400 * 3);
        assert_eq!(BucketWidth::Hour.start_of(at(3_599)), 0);
        assert_eq!(BucketWidth::Day.start_of(at(-1)), -86_400);
        assert_eq!(BucketWidth::Hour.start_of(at(-3_600)), -3_600);
    }

    #[test]
    fn a_time_beyond_i64_seconds_saturates_instead_of_overflowing() {
        let earliest = UNIX_EPOCH - Duration::from_secs(i64::MAX as u64);
        assert_eq!(BucketWidth::Day.start_of(earliest), i64::MIN);
        let latest = UNIX_EPOCH + Duration::from_secs(u64::MAX / 2);
        let start = BucketWidth::Hour.start_of(latest);
        assert!(start > 0 && start % 3_600 == 0, "{start}");
    }
}
