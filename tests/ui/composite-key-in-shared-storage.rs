// A composite key keys a table of its own: the shared table has one `record_id` column.
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(primary_key(user_id, post_id))]
#[slotted(counter = likes, slots = 16, storage = shared)]
struct Like {
    user_id: i32,
    post_id: i32,
}

fn main() {}
