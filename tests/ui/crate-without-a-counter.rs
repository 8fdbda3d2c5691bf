use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(crate = slotted_core)]
struct Post {
    id: i32,
}

fn main() {}
