//! One slot per record, each writer on its own record: the counter statement the pgbench anchor
//! runs ([`crate::anchors::Target::PrivateRow`], table `bench_private_hits_slots`), for the
//! benchmarks that measure a path to the database rather than contention (`pooler`, `failover`).

use slotted_core::SlottedCounter;

diesel::table! {
    bench_private (id) {
        id -> Integer,
    }
}

/// A record with one counter of one slot.
#[derive(Debug, SlottedCounter)]
#[diesel(table_name = bench_private)]
#[slotted(counter = hits, slots = 1)]
pub struct Private {
    /// The primary key: the writer's number.
    pub id: i32,
}
