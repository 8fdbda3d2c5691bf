// `counter: likes` is a syntax error; the derive still declares `likes`, `likes_of` and
// `likes_totals` (as stubs), so the syntax error is the only error, not also "no method
// `likes`" at every use.
use diesel::prelude::*;
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter: likes, slots = 16)]
struct Post {
    id: i32,
}

fn count(post: &Post, conn: &mut SqliteConnection) -> slotted_core::Result<i64> {
    post.likes().increment(conn)?;
    Post::likes_of(1).add(3, conn)?;
    let totals = Post::likes_totals(&[1, 2], conn)?;
    Ok(post.likes().total(conn)? + totals[&2])
}

fn main() {}
