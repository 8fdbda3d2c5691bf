use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(table_name = posts)]
#[slotted(counter = views, slots = 16, adopt = views_count, bucket = day)]
struct Post {
    id: i32,
}

fn main() {}
