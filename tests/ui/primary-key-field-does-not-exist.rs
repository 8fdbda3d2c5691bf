use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(primary_key(post_id))]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: i32,
}

fn main() {}
