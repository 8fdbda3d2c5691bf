use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 0)]
struct Post {
    id: i32,
}

fn main() {}
