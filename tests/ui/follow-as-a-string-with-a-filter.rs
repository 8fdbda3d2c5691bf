use slotted_core::SlottedCounter;

diesel::table! {
    posts (id) {
        id -> Integer,
        likes -> Integer,
    }
}

diesel::table! {
    comments (id) {
        id -> BigInt,
        post_id -> Nullable<Integer>,
        author -> Text,
        wide_post_id -> BigInt,
        title -> Text,
        score -> Integer,
        deleted -> Bool,
        local -> Bool,
    }
}

#[derive(SlottedCounter)]
#[diesel(table_name = posts)]
#[slotted(counter = comments, slots = 16, follow = "comments", filter(local))]
struct Post {
    id: i32,
}

fn main() {}
