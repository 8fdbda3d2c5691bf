use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(primary_key(url))]
#[slotted(counter = views, slots = 16, storage = shared)]
struct Page {
    url: String,
}

fn main() {}
