// `max_key_length` sizes a text key's column: on a newtype over an integer it is refused at the
// attribute's value (checked by the type system, as the derive does not know the newtype).
use slotted_core::{SlottedCounter, SlottedKey};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, SlottedKey)]
struct PostId(i32);

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16, max_key_length = 64)]
struct Post {
    id: PostId,
}

fn main() {}
