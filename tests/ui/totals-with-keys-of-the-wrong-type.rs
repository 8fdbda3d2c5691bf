use diesel::prelude::*;
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: i32,
}

fn count(conn: &mut SqliteConnection) {
    let ids: Vec<i64> = vec![1, 2, 3];
    Post::likes_totals(&ids, conn).unwrap();
}

fn main() {}
