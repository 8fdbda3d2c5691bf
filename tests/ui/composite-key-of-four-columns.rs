use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(primary_key(a, b, c, d))]
#[slotted(counter = likes, slots = 16)]
struct Cell {
    a: i32,
    b: i32,
    c: i32,
    d: i32,
}

fn main() {}
