#[derive(SlottedCounter)]
#[slotted(crate = slotted)]
#[slotted(counter = likes, slots = 16, adopt = likes_count, cache = likes_count)]
#[slotted(counter = views, slots = 64, bucket = day, table = video_view_slots)]
#[slotted(counter = shares, slots = 8, prefill)]
#[slotted(counter = saves, slots = 2, storage = shared)]
pub struct Video {
    #[diesel(column_name = video_id)]
    pub id: i64,
}
