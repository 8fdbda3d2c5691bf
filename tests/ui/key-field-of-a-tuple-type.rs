// One key field of a tuple type: a composite key names each column in `primary_key`.
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Like {
    id: (i32, i32),
}

fn main() {}
