// With an unusable key no counter can be declared: every counter named is a stub.
#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: Ulid,
}
