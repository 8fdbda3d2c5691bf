// A composite primary key: that is the only error, not also "no method `likes`" at every use
// of the counter.
use diesel::prelude::*;
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(primary_key(user_id, post_id))]
#[slotted(counter = likes, slots = 16)]
struct Like {
    user_id: i32,
    post_id: i32,
}

fn count(like: &Like, conn: &mut SqliteConnection) -> slotted_core::Result<i64> {
    like.likes().increment(conn)?;
    Like::likes_of(1).add(3, conn)?;
    let totals = Like::likes_totals(&[1, 2], conn)?;
    Ok(like.likes().total(conn)? + totals[&2])
}

fn main() {}
