// `#[diesel(table_name = …)]` names a table that is not in scope: one error, at the attribute,
// however many counters look up a column of it.
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(table_name = humans)]
#[slotted(counter = likes, slots = 16, cache = likes_count)]
#[slotted(counter = views, slots = 16, adopt = views_count)]
struct Human {
    id: i32,
}

fn main() {}
