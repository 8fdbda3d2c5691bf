// An adopted column's counts belong to one counter: adopting it twice would count them twice,
// rolling another counter up into it would write over them.
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(table_name = posts)]
#[slotted(counter = likes, slots = 16, adopt = likes_count)]
#[slotted(counter = hearts, slots = 16, adopt = likes_count)]
#[slotted(counter = views, slots = 16, cache = likes_count)]
struct Post {
    id: i32,
}

fn main() {}
