#[derive(SlottedCounter)]
#[diesel(table_name = pages, primary_key(url))]
#[slotted(counter = views, slots = 4, strategy = random, max_key_length = 512)]
pub(crate) struct Page {
    url: String,
}
