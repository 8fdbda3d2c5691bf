use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: i32,
}

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Video {
    id: i32,
}

fn count() -> slotted_core::Counter<'static, posts_likes_slots::table> {
    Video::likes_of(1)
}

fn main() {}
