#[derive(SlottedCounter)]
#[diesel(table_name = posts)]
#[slotted(counter = likes, slots = 16)]
pub struct Post {
    pub id: i32,
    pub title: String,
}
