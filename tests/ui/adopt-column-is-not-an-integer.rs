use slotted_core::SlottedCounter;

diesel::table! {
    posts (id) {
        id -> Integer,
        likes_count -> Nullable<BigInt>,
    }
}

#[derive(SlottedCounter)]
#[diesel(table_name = posts)]
#[slotted(counter = likes, slots = 16, adopt = likes_count)]
struct Post {
    id: i32,
}

fn main() {}
