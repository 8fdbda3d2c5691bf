use diesel::prelude::*;
use slotted_core::{CounterMaintenance, SlottedCounter};

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: i32,
}

fn absorb(conn: &mut SqliteConnection) {
    posts_likes_slots::table.absorb_all(1000, conn).unwrap();
}

fn main() {}
