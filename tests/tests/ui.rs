//! Every misuse of the derive and of the generated API is a compile error that points at the
//! mistake and says how to fix it: one file per failure in `tests/ui/`, its exact compiler output
//! beside it. `TRYBUILD=overwrite cargo test --test ui` rewrites the `.stderr` files; review them.

#[test]
fn ui() {
    trybuild::TestCases::new().compile_fail("ui/*.rs");
}
