use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slot = 16)]
struct Post {
    id: i32,
}

fn main() {}
