use diesel::prelude::*;
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: i32,
}

fn count(post: &Post, conn: &mut SqliteConnection) {
    post.shares().increment(conn).unwrap();
}

fn main() {}
