use diesel::prelude::*;
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: i32,
}

fn count(conn: &mut SqliteConnection) {
    Post::likes_of("42").increment(conn).unwrap();
}

fn main() {}
