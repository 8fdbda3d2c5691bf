use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post<T> {
    id: i32,
    body: T,
}

fn main() {}
