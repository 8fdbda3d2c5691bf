use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16, storage = shared, bucket = day)]
struct Post {
    id: i32,
}

fn main() {}
