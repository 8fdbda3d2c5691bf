use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(primary_key(url))]
#[slotted(counter = views, slots = 16, max_key_length = 2048)]
struct Page {
    url: String,
}

fn main() {}
