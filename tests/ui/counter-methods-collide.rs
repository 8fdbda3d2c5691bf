use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
#[slotted(counter = likes_of, slots = 16)]
struct Post {
    id: i32,
}

fn main() {}
