// A newtype over a type that keys nothing: refused at its field, with the types that do.
use slotted_core::SlottedKey;

#[derive(Debug, Clone, PartialEq, Eq, Hash, SlottedKey)]
struct Ulid(u128);

fn main() {}
