// The shared table keeps integer keys: a newtype over a `String` is refused at `storage = shared`.
use slotted_core::{SlottedCounter, SlottedKey};

#[derive(Debug, Clone, PartialEq, Eq, Hash, SlottedKey)]
struct Handle(String);

#[derive(SlottedCounter)]
#[slotted(counter = mentions, slots = 16, storage = shared)]
struct Member {
    id: Handle,
}

fn main() {}
