use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: i32,
}

fn count(pool: &mut Vec<u8>) {
    Post::likes_of(1).increment(pool).unwrap();
}

fn main() {}
