// `likes_of` takes the key type or one that converts without loss: an `i64` for an `i32` key
// says so, rather than "`i32: From<i64>` is not satisfied".
use diesel::prelude::*;
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: i32,
}

fn count(post_id: i64, conn: &mut SqliteConnection) {
    Post::likes_of(post_id).increment(conn).unwrap();
}

fn main() {}
