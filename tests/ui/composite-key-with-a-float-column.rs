// One column of a composite key that keys nothing: one error, at that field.
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(primary_key(station, reading))]
#[slotted(counter = views, slots = 16)]
struct Reading {
    station: i32,
    reading: f64,
}

fn main() {}
