#[derive(SlottedCounter)]
#[diesel(table_name = posts)]
#[slotted(counter = comments, slots = 16, follow = comments(post_id), filter(local, not(deleted)))]
#[slotted(counter = score, slots = 8, follow = post_votes(post_id), sum = score)]
pub struct Post {
    pub id: i32,
}
