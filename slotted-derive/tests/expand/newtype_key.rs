// A key type the derive does not know by name (a newtype with `#[derive(SlottedKey)]`, or a
// type that keys nothing, which the type system refuses at `CounterTable::Key`): its column is
// `KeyOf<Ulid>`, through an alias the `table!` imports.
#[derive(SlottedCounter)]
#[slotted(counter = likes, slots = 16)]
struct Post {
    id: Ulid,
}
