//! `cargo test --manifest-path tests/feature-off/Cargo.toml`: slotted-core has only `sqlite`,
//! diesel also has `postgres`, and a counter call on a `PgConnection` is a compile error that names
//! the feature to enable.

#[test]
fn ui() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
