use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted]
struct Post {
    id: i32,
}

fn main() {}
