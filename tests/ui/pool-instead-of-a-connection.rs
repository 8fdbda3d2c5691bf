// A pool is not a connection: the error says to pass one of its connections.
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: i32,
}

fn count(pool: &mut Pool<ConnectionManager<SqliteConnection>>) {
    Post::likes_of(1).increment(pool).unwrap();
}

fn main() {}
