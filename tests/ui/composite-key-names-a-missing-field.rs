use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(primary_key(user_id, post))]
#[slotted(counter = likes, slots = 16)]
struct Like {
    user_id: i32,
    post_id: i32,
}

fn main() {
    // The counter's methods still exist: the attribute's error is the only one.
    let _ = Like::likes_of((1, 2));
}
