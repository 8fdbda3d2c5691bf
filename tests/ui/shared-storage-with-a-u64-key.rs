// The shared table keeps keys as BIGINT: a `u64` key does not fit it.
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = views, slots = 16, storage = shared)]
struct Blob {
    id: u64,
}

fn main() {}
