use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16, bucket = week)]
struct Post {
    id: i32,
}

fn main() {}
