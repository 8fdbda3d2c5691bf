use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16, max_key_length = 100)]
struct Post {
    id: i32,
}

fn main() {}
