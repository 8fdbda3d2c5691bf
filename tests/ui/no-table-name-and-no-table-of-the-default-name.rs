// No `#[diesel(table_name = …)]`: the table is Diesel's default, `persons` (snake_case, plus
// `s`), which `cache = …` needs and which is not in scope (the table is `person`). One error, at
// the struct, naming the table it looked for and `table_name`.
use slotted_core::SlottedCounter;

diesel::table! {
    person (id) {
        id -> Integer,
        likes_count -> BigInt,
    }
}

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16, cache = likes_count)]
#[slotted(counter = views, slots = 16, adopt = views_count)]
struct Person {
    id: i32,
}

fn main() {
    let _ = Person::likes_of(1);
}
