use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 0)]
#[slotted(counter = views, slots = 16, colour = blue)]
#[slotted(counter = shares)]
struct Post {
    id: i32,
}

fn main() {}
