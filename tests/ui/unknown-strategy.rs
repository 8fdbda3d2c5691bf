use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16, strategy = round_robin)]
struct Post {
    id: i32,
}

fn main() {}
