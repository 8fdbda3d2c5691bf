use slotted_core::SlottedCounter;

diesel::table! {
    communities (id) {
        id -> Integer,
    }
}

diesel::table! {
    posts (id) {
        id -> Integer,
        community_id -> Nullable<Integer>,
        wide_community_id -> BigInt,
        title -> Text,
    }
}

diesel::table! {
    post_tags (post_id, tag) {
        post_id -> Integer,
        tag -> Text,
        community_id -> Integer,
    }
}

diesel::table! {
    comments (id) {
        id -> BigInt,
        post_id -> Nullable<Integer>,
        wide_post_id -> BigInt,
        deleted -> Bool,
    }
}

#[derive(SlottedCounter)]
#[diesel(table_name = communities)]
#[slotted(counter = comments, slots = 16, follow = comments(post_id), through = post(community_id))]
struct Community {
    id: i32,
}

fn main() {}
