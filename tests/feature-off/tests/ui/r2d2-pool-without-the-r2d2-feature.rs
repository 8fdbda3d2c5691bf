// docs/guide/clusters.md's snippet without slotted-core's `r2d2` feature: an r2d2 pool where a
// `ConnectionPool` is wanted is one error that names the feature.
use diesel::r2d2::{ConnectionManager, Pool};
use diesel::SqliteConnection;
use slotted_core::failover::transaction_with_failover;
use slotted_core::retry::RetryPolicy;
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
pub struct Post {
    pub id: i32,
}

fn like(pool: &Pool<ConnectionManager<SqliteConnection>>) -> slotted_core::Result<()> {
    transaction_with_failover(pool, &RetryPolicy::failover(), |conn| {
        Post::likes_of(1).increment(conn)
    })?;
    Ok(())
}

fn main() {}
