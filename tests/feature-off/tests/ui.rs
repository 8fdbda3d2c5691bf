//! `cargo test --manifest-path tests/feature-off/Cargo.toml`: slotted-core has only `sqlite`
//! and `async`, while the user's code has diesel's PostgreSQL backend, r2d2, UUID and date
//! columns and diesel-async's bb8 and deadpool pools. Each use of what another slotted-core
//! feature adds is one compile error, at the user's code, that names the feature to turn on.
//! `TRYBUILD=overwrite` rewrites the `.stderr` files; review them.

#[test]
fn ui() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
