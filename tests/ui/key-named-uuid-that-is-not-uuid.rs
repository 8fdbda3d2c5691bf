// A key type named `Uuid` that is not `uuid::Uuid` and keys nothing: one error, at the field,
// with the types that key a counter (not a second one at the derive).
use slotted_core::SlottedCounter;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Uuid(u128);

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: Uuid,
}

fn main() {}
