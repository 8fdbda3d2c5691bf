use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16, table = post_counters)]
#[slotted(counter = views, slots = 16, table = post_counters)]
struct Post {
    id: i32,
}

fn main() {}
