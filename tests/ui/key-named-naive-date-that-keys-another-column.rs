// A newtype called `NaiveDate` that keys an integer column: the derive declares the counter
// table's column `Date` by the type's name, and the check says the type keys another column.
use slotted_core::{SlottedCounter, SlottedKey};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, SlottedKey)]
struct NaiveDate(i32);

#[derive(SlottedCounter)]
#[diesel(primary_key(post_id, day))]
#[slotted(counter = views, slots = 4)]
struct PostDay {
    post_id: i32,
    day: NaiveDate,
}

fn main() {}
