use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = type, slots = 16)]
struct Post {
    id: i32,
}

fn main() {}
