// A newtype over `uuid::Uuid` without slotted-core's `uuid` feature: one error, at its field,
// naming the feature; the model keyed by it adds none.
use slotted_core::{SlottedCounter, SlottedKey};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, SlottedKey)]
pub struct PersonId(uuid::Uuid);

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
pub struct Person {
    pub id: PersonId,
}

fn main() {}
