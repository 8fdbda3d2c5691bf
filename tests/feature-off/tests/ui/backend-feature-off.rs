use diesel::PgConnection;
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: i32,
}

fn count(conn: &mut PgConnection) {
    Post::likes_of(1).increment(conn).unwrap();
}

fn main() {}
