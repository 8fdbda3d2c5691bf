use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
enum Post {
    Draft,
}

fn main() {}
