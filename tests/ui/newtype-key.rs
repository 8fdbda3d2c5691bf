// A newtype key (as diesel-derive-newtype makes them): not supported yet, said at the field.
use slotted_core::SlottedCounter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PostId(i32);

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: PostId,
}

fn main() {}
