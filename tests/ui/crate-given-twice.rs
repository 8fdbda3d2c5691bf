use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(crate = slotted_core)]
#[slotted(counter = likes, slots = 16, crate = slotted_core)]
struct Post {
    id: i32,
}

fn main() {}
