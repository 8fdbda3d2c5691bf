//! What the sync and async outage tests share: the adds they acknowledge, and filling the buffer
//! to its cap.

use std::collections::HashMap;

use slotted_core::buffer::Buffer;
use slotted_core::Error;
use slotted_tests::models::Post;

/// Adds 1 to each key, recording what was acknowledged.
pub fn add_each(buffer: &impl Buffer, keys: std::ops::Range<i32>, acked: &mut HashMap<i32, i64>) {
    for key in keys {
        Post::likes_of(key).increment_buffered(buffer).unwrap();
        *acked.entry(key).or_default() += 1;
    }
}

/// Adds new keys from 200 on until the buffer refuses one: with 200 keys held and a cap of 500
/// entries, it takes exactly 300 and then refuses with `BufferFull`. `stats` formats the
/// buffer's statistics for the messages.
pub fn fill_to_the_cap(
    buffer: &impl Buffer,
    acked: &mut HashMap<i32, i64>,
    stats: impl Fn() -> String,
) {
    let mut taken = 0;
    let full = loop {
        match Post::likes_of(200 + taken).increment_buffered(buffer) {
            Ok(()) => {
                *acked.entry(200 + taken).or_default() += 1;
                taken += 1;
            }
            Err(e) => break e,
        }
        assert!(taken <= 500, "never refused: {}", stats());
    };
    assert_eq!(taken, 300, "{full}");
    assert!(
        matches!(
            full,
            Error::BufferFull {
                pending_keys: 500,
                max_pending_keys: 500,
                ..
            }
        ),
        "{full:?}"
    );
}
