// A key type slotted cannot store: that is the only error, not also "no method `likes`" at
// every use of the counter.
use diesel::prelude::*;
use slotted_core::SlottedCounter;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Ulid(u128);

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: Ulid,
}

fn count(post: &Post, conn: &mut SqliteConnection) -> slotted_core::Result<i64> {
    post.likes().increment(conn)?;
    Post::likes_of(post.id).add(3, conn)?;
    let totals = Post::likes_totals(&[post.id], conn)?;
    Ok(post.likes().total(conn)? + totals[&post.id])
}

fn main() {}
