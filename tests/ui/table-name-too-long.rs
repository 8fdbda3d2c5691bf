use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(table_name = community_discussion_threads)]
#[slotted(counter = distinct_reader_impressions_total, slots = 16)]
struct Thread {
    id: i32,
}

fn main() {}
