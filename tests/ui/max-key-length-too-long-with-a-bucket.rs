// 766 `utf8mb4` characters fit a `(record_id, slot)` key but not `(record_id, bucket, slot)`:
// MariaDB refuses the migration ("max key length is 3072 bytes"), so the derive refuses it first.
use slotted_core::SlottedCounter;

#[derive(SlottedCounter)]
#[diesel(primary_key(url))]
#[slotted(counter = daily, slots = 2, bucket = day, max_key_length = 766)]
struct Page {
    url: String,
}

fn main() {}
