use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = r#likes, slots = 16)]
struct Post {
    id: i32,
}

fn main() {}
