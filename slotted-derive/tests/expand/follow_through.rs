#[derive(SlottedCounter)]
#[diesel(table_name = communities)]
#[slotted(counter = comments, slots = 16, follow = comments(post_id), through = posts(community_id), filter(not(deleted)))]
pub struct Community {
    pub id: i32,
}
