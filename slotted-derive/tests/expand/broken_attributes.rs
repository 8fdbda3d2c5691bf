// Beside the errors: `views` in full; `likes` (its attribute's syntax is broken) and `shares`
// (its table name is not an identifier) as stubs on `InvalidCounter`.
#[derive(SlottedCounter)]
#[slotted(counter: likes, slots = 16)]
#[slotted(counter = views, slots = 8, strategy = fastest)]
#[slotted(counter = shares, slots = 4, table = r#type)]
pub struct Post {
    pub id: i32,
}
