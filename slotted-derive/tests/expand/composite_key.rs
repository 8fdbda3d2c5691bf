// A composite primary key: the counter table has a column per key column (`record_id`,
// `record_id_2`), the key type is the tuple of the key fields' types in `primary_key` order,
// a record's own counter builds its key from its fields, and the roll-up joins on both columns.
#[derive(SlottedCounter)]
#[diesel(table_name = post_votes, primary_key(person_id, post_id))]
#[slotted(counter = score, slots = 8, cache = score_count)]
struct PostVote {
    post_id: PostId,
    person_id: i32,
}
