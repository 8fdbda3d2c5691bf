#[derive(SlottedCounter)]
#[diesel(table_name = crate::schema::r#match, primary_key(r#type))]
#[slotted(counter = goals, slots = 8, cache = goals_count)]
#[slotted(counter = fouls, slots = 2, storage = shared)]
pub struct r#Match {
    pub r#type: i32,
}
