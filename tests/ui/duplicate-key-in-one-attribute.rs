use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16, slots = 32)]
struct Post {
    id: i32,
}

fn main() {}
