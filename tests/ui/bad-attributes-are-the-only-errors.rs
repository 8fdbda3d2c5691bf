// Two mistaken attributes, and code that uses both counters: the two mistakes are all the
// compiler reports, not also "no method `likes`" at every use.
use diesel::prelude::*;
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 0)]
#[slotted(counter = views, slots = 16, strategy = fastest)]
struct Post {
    id: i32,
}

fn count(post: &Post, conn: &mut SqliteConnection) -> slotted_core::Result<i64> {
    post.likes().increment(conn)?;
    Post::views_of(7).add(3, conn)?;
    let totals = Post::likes_totals(&[1, 2], conn)?;
    Ok(post.likes().total(conn)? + totals[&2])
}

fn main() {}
