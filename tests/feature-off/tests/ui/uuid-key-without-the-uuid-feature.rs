// A model keyed by `uuid::Uuid` without slotted-core's `uuid` feature: one error, at the key
// field, naming the feature; the counter's calls add none.
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
pub struct Person {
    pub id: uuid::Uuid,
}

fn count(conn: &mut diesel::SqliteConnection, person: &Person) {
    person.likes().increment(conn).unwrap();
    Person::likes_of(uuid::Uuid::nil()).increment(conn).unwrap();
}

fn main() {}
