use diesel::prelude::*;
use slotted_core::{CounterMaintenance, SlottedCounter};

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: i32,
}

fn retention(conn: &mut SqliteConnection) {
    posts_likes_slots::table
        .delete_buckets_before(std::time::SystemTime::now(), 1000, conn)
        .unwrap();
}

fn main() {}
