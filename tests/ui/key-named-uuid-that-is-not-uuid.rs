// A key type named `Uuid` that is not `uuid::Uuid`: the derive declares a `Uuid` column for
// it by name, and the check says what the type would have to be.
use slotted_core::SlottedCounter;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Uuid(u128);

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: Uuid,
}

fn main() {}
