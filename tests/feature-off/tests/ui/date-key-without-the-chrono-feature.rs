// A composite key with a `chrono::NaiveDate` column without slotted-core's `chrono` feature:
// one error, at the date field, naming the feature.
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(table_name = post_days, primary_key(post_id, day))]
#[slotted(counter = views, slots = 4)]
pub struct PostDay {
    pub post_id: i32,
    pub day: chrono::NaiveDate,
}

fn main() {}
