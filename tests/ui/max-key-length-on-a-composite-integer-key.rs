use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(primary_key(user_id, post_id))]
#[slotted(counter = likes, slots = 16, max_key_length = 100)]
struct Like {
    user_id: i32,
    post_id: i64,
}

fn main() {}
