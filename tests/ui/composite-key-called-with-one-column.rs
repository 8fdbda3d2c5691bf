// A composite key is a tuple of its columns, in `primary_key` order.
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(primary_key(user_id, post_id))]
#[slotted(counter = likes, slots = 16)]
struct Like {
    user_id: i32,
    post_id: i64,
}

fn main() {
    let _ = Like::likes_of(7);
    let _ = Like::likes_of((7_i64, 1_i32));
}
