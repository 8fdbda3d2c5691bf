// A newtype over a tuple keys two columns, and the model's primary key names one.
use slotted_core::{SlottedCounter, SlottedKey};

#[derive(Debug, Clone, PartialEq, Eq, Hash, SlottedKey)]
struct Pair((i32, i32));

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Like {
    id: Pair,
}

fn main() {}
