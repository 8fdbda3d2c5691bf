// `SlottedKey` keys a counter by a newtype's one field: a struct of two is refused at the struct.
use slotted_core::SlottedKey;

#[derive(Debug, Clone, PartialEq, Eq, Hash, SlottedKey)]
struct VersionDay(i32, i64);

#[derive(Debug, Clone, PartialEq, Eq, Hash, SlottedKey)]
enum Id {
    Post(i32),
}

fn main() {}
