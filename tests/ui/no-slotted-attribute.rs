use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
struct Post {
    id: i32,
}

fn main() {}
