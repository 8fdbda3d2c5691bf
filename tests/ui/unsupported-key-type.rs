use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: f64,
}

fn main() {}
