use slotted_core::SlottedCounter;

diesel::table! {
    posts (site_id, id) {
        site_id -> Integer,
        id -> Integer,
    }
}

diesel::table! {
    comments (id) {
        id -> BigInt,
        site_id -> Integer,
        post_id -> Integer,
    }
}

#[derive(SlottedCounter)]
#[diesel(table_name = posts, primary_key(site_id, id))]
#[slotted(counter = comments, slots = 16, follow = comments(post_id))]
struct Post {
    site_id: i32,
    id: i32,
}

fn main() {}
