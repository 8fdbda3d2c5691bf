use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes)]
struct Post {
    id: i32,
}

fn main() {}
