// A newtype key (as diesel-derive-newtype makes them) without `#[derive(SlottedKey)]`: one
// error, at the field, that says to derive it.
use slotted_core::SlottedCounter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PostId(i32);

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: PostId,
}

fn main() {}
